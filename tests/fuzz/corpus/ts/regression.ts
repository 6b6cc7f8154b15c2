@problemName Reg
@timeStamps false
@missing false
@univariate true
@equalLength false
@targetLabel true
@data
1.5,2.5:0.25
-1e3,4,5,6:-2
