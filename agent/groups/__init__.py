"""The group coordinator: Kafka's classic consumer-group protocol served by any agent for
the groups whose lease it holds in the metadata store (coordinator.py), over the in-memory
group state and its rules (group.py)."""
