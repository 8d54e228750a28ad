use crate::Out;
pub fn main(_out: &Out, _json: bool, _quick: bool) -> i32 {
    0
}
