"""The group coordinator: Kafka's classic consumer-group protocol served by any agent for
the groups whose lease it holds in the metadata store, split as Kafka's ClassicGroup:

- group.py: one group's state (members, generation, deadlines), plain data;
- transitions.py: the protocol's rules, pure: `step(group, event, now) -> (group,
  effects)`;
- coordinator.py: the effect runner (loading, leases, the group's lock, answers to the
  waiting requests, stores, alarms on the injected Clock);
- offsets.py: committed offsets (OffsetCommit, OffsetDelete);
- subscription.py: the consumer protocol's opaque bytes."""
