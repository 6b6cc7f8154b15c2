@problemName Bad
@univariate false
@dimensions 2
@equalLength false
@classLabel true a b
@data
1.0,abc,3:1,2,3:a
