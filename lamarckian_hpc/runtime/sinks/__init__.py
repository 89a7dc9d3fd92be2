"""Live metric sinks that observe a run's update reports, apart from the run file: TensorBoard event
files, Weights & Biases and MLflow. A sink that fails logs one line and never stops the run."""
