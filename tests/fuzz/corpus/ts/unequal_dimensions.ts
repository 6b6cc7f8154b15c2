@dimensions 2
@classLabel true a b
@data
1,2,3:1,2:a
1e39:1:a
:1,2:a
