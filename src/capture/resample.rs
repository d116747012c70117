//! Streaming fixed-ratio resampling to the pipeline rate (rubato's FFT resampler).
//!
//! Contract: [`StreamResampler::push`] accepts mono input in pieces of any size and appends
//! output; [`StreamResampler::finish`] flushes, so that in total exactly
//! `round(input_len * out_rate / in_rate)` samples come out, aligned with the input (the
//! resampler's start-up delay is trimmed). The result does not depend on how the input was
//! split.

use rubato::audioadapter_buffers::direct::InterleavedSlice;
use rubato::{Fft, FixedSync, Indexing, Resampler};

/// Input frames per resampler call.
const CHUNK_IN: usize = 1024;

#[derive(Debug, thiserror::Error)]
#[error("resampler failed: {0}")]
pub struct ResampleError(String);

pub struct StreamResampler {
    inner: Fft<f32>,
    in_rate: u32,
    out_rate: u32,
    pending: Vec<f32>,
    out_buf: Vec<f32>,
    delay_left: usize,
    in_total: u64,
    out_total: u64,
}

impl StreamResampler {
    pub fn new(in_rate: u32, out_rate: u32) -> Result<Self, ResampleError> {
        let inner = Fft::<f32>::new(
            in_rate as usize,
            out_rate as usize,
            CHUNK_IN,
            1,
            FixedSync::Input,
        )
        .map_err(|e| ResampleError(e.to_string()))?;
        let delay_left = inner.output_delay();
        let out_buf = vec![0.0; inner.output_frames_max()];
        Ok(Self {
            inner,
            in_rate,
            out_rate,
            pending: Vec::with_capacity(CHUNK_IN * 2),
            out_buf,
            delay_left,
            in_total: 0,
            out_total: 0,
        })
    }

    /// Total output length for `input_len` input samples.
    pub fn output_len_for(&self, input_len: u64) -> u64 {
        let num = u128::from(input_len) * u128::from(self.out_rate);
        let den = u128::from(self.in_rate);
        u64::try_from((num + den / 2) / den).unwrap_or(u64::MAX)
    }

    /// Feeds input; appends every output sample that is ready to `out`.
    pub fn push(&mut self, input: &[f32], out: &mut Vec<f32>) -> Result<(), ResampleError> {
        self.in_total += input.len() as u64;
        self.pending.extend_from_slice(input);
        let mut start = 0;
        while self.pending.len() - start >= self.inner.input_frames_next() {
            let need = self.inner.input_frames_next();
            self.run(start, need, None, out)?;
            start += need;
        }
        self.pending.drain(..start);
        Ok(())
    }

    /// Flushes the tail: after this, the total output is [`Self::output_len_for`] the input.
    pub fn finish(&mut self, out: &mut Vec<f32>) -> Result<(), ResampleError> {
        let target = self.output_len_for(self.in_total);
        // Feed what is pending, then silence, until the delayed tail has come out.
        let mut guard = 0;
        while self.out_total < target {
            let need = self.inner.input_frames_next();
            let have = self.pending.len().min(need);
            self.pending.resize(need, 0.0);
            let partial = if have < need { Some(have) } else { None };
            self.run(0, need, partial, out)?;
            self.pending.clear();
            guard += 1;
            if guard > 64 {
                return Err(ResampleError("flush did not converge".into()));
            }
        }
        let excess = usize::try_from(self.out_total - target).unwrap_or(0);
        out.truncate(out.len().saturating_sub(excess));
        self.out_total = target;
        Ok(())
    }

    fn run(
        &mut self,
        start: usize,
        len: usize,
        partial: Option<usize>,
        out: &mut Vec<f32>,
    ) -> Result<(), ResampleError> {
        let input = InterleavedSlice::new(&self.pending[start..start + len], 1, len)
            .map_err(|e| ResampleError(e.to_string()))?;
        let out_frames = self.out_buf.len();
        let mut output = InterleavedSlice::new_mut(&mut self.out_buf[..], 1, out_frames)
            .map_err(|e| ResampleError(e.to_string()))?;
        let indexing = Indexing {
            input_offset: 0,
            output_offset: 0,
            partial_len: partial,
            active_channels_mask: None,
        };
        let (_, produced) = self
            .inner
            .process_into_buffer(&input, &mut output, Some(&indexing))
            .map_err(|e| ResampleError(e.to_string()))?;
        let skip = self.delay_left.min(produced);
        self.delay_left -= skip;
        out.extend_from_slice(&self.out_buf[skip..produced]);
        self.out_total += (produced - skip) as u64;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tone(rate: u32, hz: f32, len: usize) -> Vec<f32> {
        (0..len)
            .map(|i| (2.0 * std::f32::consts::PI * hz * i as f32 / rate as f32).sin() * 0.5)
            .collect()
    }

    #[test]
    fn length_is_exact_and_split_invariant() {
        let input = tone(44_100, 440.0, 44_100 + 123);
        let mut whole = Vec::new();
        let mut r = StreamResampler::new(44_100, 16_000).unwrap();
        r.push(&input, &mut whole).unwrap();
        r.finish(&mut whole).unwrap();
        assert_eq!(whole.len() as u64, r.output_len_for(input.len() as u64));

        let mut pieces = Vec::new();
        let mut r = StreamResampler::new(44_100, 16_000).unwrap();
        for chunk in input.chunks(777) {
            r.push(chunk, &mut pieces).unwrap();
        }
        r.finish(&mut pieces).unwrap();
        assert_eq!(whole, pieces);
    }

    #[test]
    fn tone_stays_aligned_after_resampling() {
        // A 440 Hz tone resampled 48k -> 16k must match the same tone generated at 16 kHz
        // (delay trimmed), away from the edges.
        let input = tone(48_000, 440.0, 48_000);
        let mut out = Vec::new();
        let mut r = StreamResampler::new(48_000, 16_000).unwrap();
        r.push(&input, &mut out).unwrap();
        r.finish(&mut out).unwrap();
        let expected = tone(16_000, 440.0, 16_000);
        let max_err = out[2000..14000]
            .iter()
            .zip(&expected[2000..14000])
            .map(|(a, b)| (a - b).abs())
            .fold(0.0f32, f32::max);
        assert!(max_err < 0.01, "max error {max_err}");
    }
}
