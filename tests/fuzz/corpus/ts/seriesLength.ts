@problemName L
@univariate true
@equalLength true
@seriesLength 4
@classLabel false
@data
1,2,3,4
0x1p3,1e-3,-2.5E2,+7
