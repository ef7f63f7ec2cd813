/// A pump.
pub struct Pump { flow: u32 }

impl Pump {
    pub fn new() -> Self { Pump { flow: 0 } }
}
