# A comment line
#another

@problemName Tiny
@TimeStamps false
@missing true
@univariate false
@dimensions 2
@equalLength true
@seriesLength 3
@classLabel true walk run
@data
1,2,3:4,5,6:run
 7 , ? ,9:10,11,NaN:walk
