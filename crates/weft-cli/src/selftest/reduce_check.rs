//! The collectives' reduction (`weft/elementwise.cuh`'s Reducer, what every reducing kernel
//! folds with) against a float64 host reference, on one GPU.

use half::{bf16, f16};
use weft_core::selftest_kernels::SelftestRunner;

use super::report::RankReport;

const VECTORS: usize = 1031;

/// Element type under test: how to draw, widen and round values of it.
trait Element: Copy {
    const NAME: &'static str;
    const ID: u32;
    fn from_f64(v: f64) -> Self;
    fn to_f64(self) -> f64;
    fn to_bytes(self, out: &mut Vec<u8>);
    fn from_bytes(b: &[u8]) -> Self;
    const SIZE: usize;
}

macro_rules! element {
    ($t:ty, $name:literal, $id:literal, $from:expr, $to:expr) => {
        impl Element for $t {
            const NAME: &'static str = $name;
            const ID: u32 = $id;
            const SIZE: usize = size_of::<$t>();
            fn from_f64(v: f64) -> Self {
                ($from)(v)
            }
            fn to_f64(self) -> f64 {
                ($to)(self)
            }
            fn to_bytes(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            fn from_bytes(b: &[u8]) -> Self {
                let mut a = [0u8; size_of::<$t>()];
                a.copy_from_slice(b);
                <$t>::from_le_bytes(a)
            }
        }
    };
}
element!(f32, "f32", 0, |v: f64| v as f32, |x: f32| f64::from(x));
element!(f16, "f16", 1, f16::from_f64, |x: f16| x.to_f64());
element!(bf16, "bf16", 2, bf16::from_f64, |x: bf16| x.to_f64());

fn check<T: Element>(runner: &SelftestRunner<'_>, op: u32) -> Result<(), String> {
    let count = VECTORS * 16 / T::SIZE;
    let draw = || {
        // Non-zero magnitudes in [1/64, 64), random sign: no ties between +0 and -0 for min/max.
        let magnitude = 2f64.powf(rand::random::<f64>() * 12.0 - 6.0);
        T::from_f64(if rand::random::<bool>() { magnitude } else { -magnitude })
    };
    let a: Vec<T> = (0..count).map(|_| draw()).collect();
    let b: Vec<T> = (0..count).map(|_| draw()).collect();
    let bytes = |v: &[T]| {
        let mut out = Vec::with_capacity(v.len() * T::SIZE);
        v.iter().for_each(|x| x.to_bytes(&mut out));
        out
    };
    let got = runner.reduce(&bytes(&a), &bytes(&b), T::ID, op).map_err(|e| e.to_string())?;
    let mut wrong = 0;
    for i in 0..count {
        let (x, y) = (a[i].to_f64(), b[i].to_f64());
        let exact = match op {
            0 => x + y,
            1 => x.min(y),
            _ => x.max(y),
        };
        let want = T::from_f64(exact).to_f64();
        let have = T::from_bytes(&got[i * T::SIZE..(i + 1) * T::SIZE]).to_f64();
        if have.to_bits() != want.to_bits() {
            wrong += 1;
        }
    }
    if wrong == 0 {
        Ok(())
    } else {
        Err(format!("{} {}: {wrong} of {count} wrong", T::NAME, ["sum", "min", "max"][op as usize]))
    }
}

/// Checks f32, f16 and bf16 with sum, min and max; one outcome.
pub(crate) fn run(runner: &SelftestRunner<'_>, label: &str, report: &mut RankReport) {
    let mut failures = Vec::new();
    for op in 0..3 {
        for result in [check::<f32>(runner, op), check::<f16>(runner, op), check::<bf16>(runner, op)] {
            if let Err(e) = result {
                failures.push(e);
            }
        }
    }
    let outcome = if failures.is_empty() { Ok(()) } else { Err(failures.join("; ")) };
    report.record(format!("{label}reduction helpers f32/f16/bf16 x sum/min/max vs float64"), outcome);
}
