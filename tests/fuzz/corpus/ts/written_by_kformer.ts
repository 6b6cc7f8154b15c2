# Written by kformer.
@problemName default_classification
@timeStamps false
@missing true
@univariate false
@dimensions 3
@equalLength false
@classLabel true class_a class_b class_c
@data
0.1,3.4e+38,?:-1e-07,0.33333334,2:8,9,10:class_b
1.40129846e-45,-0:2,?:?,7:class_a
5:6:7:class_c
