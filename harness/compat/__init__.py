"""librdkafka's own regression suite against siltstream (`make compat`): build its
test-runner (`build`), choose and classify its broker tests (`suite`), run them against
`silt agent` processes (`run`), write docs/compatibility.md (`report`)."""
