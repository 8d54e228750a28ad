// Adversarial: attention_output that never writes `out`. On a device that does not clear
// outputs it "returns" whatever the previous run left there; npu-sim poisons outputs with NaN
// unless run with the hidden --no-poison flag (then they hold seed 0's results).
use npu::*;

fn ao(k: &mut Ctx) {
    let _ = k.tensor("out");
}

npu::kernels! { attention_output => ao }
