"""The actor process: environments, the sampler and a policy that acts (torch-free unless the run
needs torch), the loop that takes the learner's weights and sends experience back. Nothing here
imports the learner side; what both sides agree on is in `runtime.run_shape` and
`runtime.messages`."""
