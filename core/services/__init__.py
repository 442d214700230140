"""The services: what the faces (the command line and the window) ask of a run or a model: advise, evaluate, export, find a learning rate, predict, serve."""
