"""What happens to a policy after training: loading it from a run file or checkpoint, evaluating it
(and recording its episodes), exporting it (TorchScript, ONNX) and exporting a run's recorded
trajectories as a Minari dataset."""
