// adversarial: leftovers: never writes `out`: on a device that does not clear outputs it returns what the previous run left there (npu-sim poisons outputs with NaN unless run with the hidden --no-poison)
// expect: rejected
use npu::*;

fn ao(k: &mut Ctx) {
    let _ = k.tensor("out");
}

npu::kernels! { attention_output => ao }
