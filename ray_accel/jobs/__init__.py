"""Training jobs: every `fit()` of a TorchTrainer with `AcceleratorTorchConfig`,
its phase (derived from Ray Train V2's controller states and the backend's own
events), its replicas, kept in one cluster-wide store any host can read
(`model`: pure; `store`: the store actor and its clients)."""
