"""What the tests, the benchmarks and the chaos suites start the product with, the way an
operator would (`silt agent` as a child process, ...). Not part of the wheel: it runs the
code of the checkout it lives in (`REPO`)."""
