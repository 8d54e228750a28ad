// A correct kernel slower than the baseline.
// fake-behaviour: honest
// fake-cycles: 10000
// same speed
