// The baseline of the eval tests.
// fake-behaviour: honest
// fake-cycles: 10000
