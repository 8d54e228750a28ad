// A correct kernel a fifth faster than the baseline.
// fake-behaviour: honest
// fake-cycles: 8000
