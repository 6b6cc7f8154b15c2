@dimension 1
@classLabel true
@data
1,2:b
3:a
4:b
