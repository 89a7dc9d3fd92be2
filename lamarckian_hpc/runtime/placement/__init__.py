"""Where the processes of a run go: the local or joined Ray cluster, actors and relays started on
hosts, the relay tree and which learner rank each actor feeds, CPU quotas, and the watch over
nodes that may drop out."""
