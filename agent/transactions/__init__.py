"""The transaction coordinator (Kafka's TransactionCoordinator): `transitions.py`, the rules
as pure `step(state, event, now) -> (state, effects)`; `coordinator.py`, the effect runner
on the injected clock (leases, stores, completion through the agent's flush); `markers.py`,
the markers written through the agent's flush with the commit hook that completes the
transaction."""
