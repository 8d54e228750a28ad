// Correct while the correctness stage watches, then twice as fast and wrong.
// fake-behaviour: wrong_after_warmup
// fake-cycles: 9000
