use crate::{error_line, Out};
/// `npuc bench`: not implemented yet (see README "Unfinished").
pub fn main(out: &Out, _json: bool, _quick: bool) -> i32 {
    out.line(&error_line("usage", "npuc bench is not implemented yet in this build"));
    2
}
