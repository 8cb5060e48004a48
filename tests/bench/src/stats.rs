//! Percentiles of latency samples.

use std::time::Duration;

/// Latency samples of one measured quantity.
#[derive(Debug, Clone, Default)]
pub struct Samples {
    values: Vec<Duration>,
}

impl Samples {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn push(&mut self, d: Duration) {
        self.values.push(d);
    }

    pub fn len(&self) -> usize {
        self.values.len()
    }

    pub fn is_empty(&self) -> bool {
        self.values.is_empty()
    }

    /// Nearest-rank percentile (`q` in 0..=100); `None` without samples.
    pub fn percentile(&self, q: f64) -> Option<Duration> {
        if self.values.is_empty() {
            return None;
        }
        let mut sorted = self.values.clone();
        sorted.sort_unstable();
        let rank = ((q / 100.0) * sorted.len() as f64).ceil() as usize;
        let idx = rank.clamp(1, sorted.len()) - 1;
        sorted.get(idx).copied()
    }

    pub fn p50(&self) -> Option<Duration> {
        self.percentile(50.0)
    }

    pub fn max(&self) -> Option<Duration> {
        self.values.iter().max().copied()
    }
}

impl FromIterator<Duration> for Samples {
    fn from_iter<I: IntoIterator<Item = Duration>>(iter: I) -> Self {
        Samples {
            values: iter.into_iter().collect(),
        }
    }
}

/// Milliseconds with two decimals, "-" when absent.
pub fn ms(d: Option<Duration>) -> String {
    d.map(|d| format!("{:.2}", d.as_secs_f64() * 1e3))
        .unwrap_or_else(|| "-".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nearest_rank_percentiles() {
        let s: Samples = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(s.p50(), Some(Duration::from_millis(50)));
        assert_eq!(s.percentile(99.0), Some(Duration::from_millis(99)));
        assert_eq!(s.percentile(100.0), Some(Duration::from_millis(100)));
        assert_eq!(s.percentile(0.0), Some(Duration::from_millis(1)));
        assert_eq!(Samples::new().p50(), None);
    }

    #[test]
    fn ms_formats_two_decimals() {
        assert_eq!(ms(Some(Duration::from_micros(1234))), "1.23");
        assert_eq!(ms(None), "-");
    }
}
