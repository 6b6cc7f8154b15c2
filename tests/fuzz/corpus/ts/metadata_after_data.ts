@data
1
@classLabel true a
