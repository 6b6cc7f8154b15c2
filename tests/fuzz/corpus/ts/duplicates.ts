@missing false
@missing true
@classLabel true a a
@dimensions 999999999999
