//! Head sampling (`--otlp-sample-ratio`): which RPCs are traced, decided once per RPC before
//! its span is made, so that an RPC left out costs no span at all, nor its store calls' spans.
//!
//! Parent-based, as OpenTelemetry's `parentbased_traceidratio`: an RPC whose (authenticated)
//! caller sent a W3C `traceparent` follows the caller's sampled flag; any other RPC is traced
//! with probability `ratio`. The draw is `rand`'s thread-local generator, not the trace id: the
//! decision is made before there is one, and nothing downstream re-samples on the trace id
//! (the SDK's own sampler stays parent-based always-on, and a traced RPC's parent, if any, is
//! sampled).

use std::sync::atomic::{AtomicU64, Ordering};

/// The ratio set by [`set_ratio`] as `f64` bits, or [`NOT_SAMPLING`]: leased started no export,
/// so every RPC's span is made as before (and is disabled where it is made, unless a layer of
/// the embedding program takes [`super::SPAN_TARGET`]).
static RATIO: AtomicU64 = AtomicU64::new(NOT_SAMPLING);

/// No ratio set: the bits of a NaN, which [`set_ratio`] never stores.
const NOT_SAMPLING: u64 = u64::MAX;

/// The sampler in force for this process's RPCs: `None` until the trace export sets a ratio.
pub(super) fn current() -> Option<Sampler> {
    match RATIO.load(Ordering::Relaxed) {
        NOT_SAMPLING => None,
        bits => Some(Sampler::new(f64::from_bits(bits))),
    }
}

/// Sets the ratio of RPCs without a caller's trace context that are traced, for every RPC from
/// now on (clamped to 0..=1; `--otlp-sample-ratio` is checked when parsed).
pub(super) fn set_ratio(ratio: f64) {
    RATIO.store(Sampler::new(ratio).ratio.to_bits(), Ordering::Relaxed);
}

/// The decision rule, for one ratio.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Sampler {
    ratio: f64,
}

impl Sampler {
    /// `ratio` clamped to 0..=1 (NaN: 0).
    pub(super) fn new(ratio: f64) -> Self {
        let ratio = if ratio.is_nan() {
            0.0
        } else {
            ratio.clamp(0.0, 1.0)
        };
        Sampler { ratio }
    }

    /// Whether to trace an RPC: `callers_flag` is the sampled flag of the caller's
    /// `traceparent` when the call continues one, and decides alone; otherwise a draw with
    /// probability `ratio` (none at 0 or 1).
    pub(super) fn sample(self, callers_flag: Option<bool>) -> bool {
        match callers_flag {
            Some(sampled) => sampled,
            None if self.ratio >= 1.0 => true,
            None if self.ratio <= 0.0 => false,
            None => rand::random::<f64>() < self.ratio,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const DRAWS: usize = 10_000;

    fn traced(sampler: Sampler, callers_flag: Option<bool>) -> usize {
        (0..DRAWS).filter(|_| sampler.sample(callers_flag)).count()
    }

    /// At 0, no RPC without a sampled parent is traced; at 1, every RPC without a parent is.
    #[test]
    fn ratio_0_never_and_ratio_1_always_without_a_callers_flag() {
        assert_eq!(traced(Sampler::new(0.0), None), 0);
        assert_eq!(traced(Sampler::new(0.0), Some(false)), 0);
        assert_eq!(traced(Sampler::new(1.0), None), DRAWS);
    }

    /// At 0.25, about a quarter of 10,000 RPCs are traced (the band is about ±8 standard
    /// deviations: a draw outside it is a bug, not bad luck).
    #[test]
    fn ratio_a_quarter_traces_about_a_quarter() {
        let count = traced(Sampler::new(0.25), None);
        assert!((2_150..=2_850).contains(&count), "{count} of {DRAWS}");
    }

    /// A caller's sampled flag decides alone, whatever the ratio.
    #[test]
    fn a_sampled_parent_always_and_an_unsampled_parent_never() {
        for ratio in [0.0, 0.25, 1.0] {
            let sampler = Sampler::new(ratio);
            assert_eq!(traced(sampler, Some(true)), DRAWS, "ratio {ratio}");
            assert_eq!(traced(sampler, Some(false)), 0, "ratio {ratio}");
        }
    }

    /// A ratio out of range is clamped (`--otlp-sample-ratio` refuses it when parsed).
    #[test]
    fn a_ratio_out_of_range_is_clamped() {
        assert_eq!(Sampler::new(2.0), Sampler::new(1.0));
        assert_eq!(Sampler::new(-1.0), Sampler::new(0.0));
        assert_eq!(Sampler::new(f64::NAN), Sampler::new(0.0));
    }
}
