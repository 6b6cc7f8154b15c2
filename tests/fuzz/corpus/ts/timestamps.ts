@timeStamps true
@data
(1,2.0),(2,3.0)
