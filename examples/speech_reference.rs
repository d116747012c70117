//! Writes the known answers of the speech models (`models/reference/silero-vad-v6.json`,
//! `models/reference/moonshine-tiny-en.json`) from 2.76 s of the demo session's speech
//! (8.28-11.04 s, "he was not an ill disposed young man"): the waveform itself (16-bit,
//! base64), the VAD's probability per 32 ms chunk and the recogniser's tokens, as this
//! crate computes them. Development tool: `cargo run --release --example speech_reference`
//! after `scripts/setup.sh`.

use std::path::Path;

use base64::Engine;
use empathic::features::speech::moonshine::Moonshine;
use empathic::features::speech::vad::SileroVad;
use empathic::features::speech::SpeechModels;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib = root.join("third_party/onnxruntime/libonnxruntime.so.1");
    let models = SpeechModels::in_dir(&root.join("models"));
    let mut reader = hound::WavReader::open(root.join("demo/session/audio.wav"))?;
    let all: Vec<i16> = reader.samples::<i16>().collect::<Result<_, _>>()?;
    let clip: Vec<i16> = all[8_280 * 16..11_040 * 16].to_vec();
    let bytes: Vec<u8> = clip.iter().flat_map(|s| s.to_le_bytes()).collect();
    let wave = base64::engine::general_purpose::STANDARD.encode(&bytes);
    let samples: Vec<f32> = clip.iter().map(|&s| f32::from(s) / 32768.0).collect();
    let mut vad = SileroVad::open("silero-vad-v6", &models.vad, Some(&lib))?;
    let probabilities = vad.push(&samples)?;
    let mut asr = Moonshine::open(
        "moonshine-tiny-en",
        &models.encoder,
        &models.decoder,
        &models.vocabulary,
        Some(&lib),
    )?;
    let r = asr.transcribe(&samples)?;
    let source =
        "demo/session/audio.wav 8.28-11.04 s (LibriVox, public domain; demo/session/PROVENANCE.md)";
    std::fs::write(
        root.join("models/reference/silero-vad-v6.json"),
        serde_json::to_string(&serde_json::json!({
            "source": source, "pcm_s16le_16k_base64": wave, "probabilities": probabilities,
        }))?,
    )?;
    std::fs::write(
        root.join("models/reference/moonshine-tiny-en.json"),
        serde_json::to_string(&serde_json::json!({
            "source": source, "pcm_s16le_16k_base64": wave, "tokens": r.tokens, "text": r.text,
        }))?,
    )?;
    println!(
        "{} chunks; tokens {:?}: {}",
        probabilities.len(),
        r.tokens,
        r.text
    );
    Ok(())
}
