//! The cosine of two vectors: the one similarity the station computes between embeddings
//! (a window's representation and a story, a model's output and its reference).
//!
//! Contract: [`cosine`] is computed in f64; it is `None` when the lengths differ or either
//! vector is zero (no direction to compare), never a silent 0 or NaN.

/// Cosine similarity of `a` and `b`, or `None` (different lengths, or a zero vector).
pub fn cosine(a: &[f32], b: &[f32]) -> Option<f64> {
    if a.len() != b.len() {
        return None;
    }
    let (mut dot, mut na, mut nb) = (0f64, 0f64, 0f64);
    for (x, y) in a.iter().zip(b) {
        let (x, y) = (f64::from(*x), f64::from(*y));
        dot += x * y;
        na += x * x;
        nb += y * y;
    }
    let norm = (na * nb).sqrt();
    (norm > 0.0).then(|| dot / norm)
}

#[cfg(test)]
mod tests {
    use super::cosine;

    #[test]
    fn cosine_of_parallel_orthogonal_zero_and_mismatched_vectors() {
        assert_eq!(cosine(&[1.0, 0.0], &[2.0, 0.0]), Some(1.0));
        assert!((cosine(&[1.0, 2.0], &[2.0, 4.0]).unwrap() - 1.0).abs() < 1e-12);
        assert_eq!(cosine(&[1.0, 0.0], &[0.0, 3.0]), Some(0.0));
        assert_eq!(cosine(&[1.0, 0.0], &[0.0, 0.0]), None);
        assert_eq!(cosine(&[1.0], &[1.0, 2.0]), None);
    }
}
