tt 75 25
th 75 0
