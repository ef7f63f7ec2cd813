#![no_main]
//! Fuzz target `safetensors` (RELIABILITY.md): any input gives an answer or an error, never a
//! panic, a hang or unbounded memory.

libfuzzer_sys::fuzz_target!(|data: &[u8]| {
    let _ = candle_core::safetensors::load_buffer(data, &candle_core::Device::Cpu);
});
