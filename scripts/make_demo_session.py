#!/usr/bin/env python3
"""Builds the bundled demo session (demo/session/video.avi and audio.wav).

Sources, both public domain and both from registry packages:
  - the NASA portrait of astronaut Eileen Collins, `skimage.data.astronaut()` from the
    scikit-image wheel on PyPI;
  - five LibriVox readings of "Sense and Sensibility" from Debian's `pocketsphinx-testdata`
    (/usr/share/pocketsphinx/test/data/librivox).

The portrait is animated with slow head motion (rotation and translation), blinks and a jaw
that opens with the speech envelope, at 640x480 and 15 fps, encoded as MJPG in AVI (what the
stations write), with ffmpeg. The audio is the five readings with short pauses, 16 kHz mono
16-bit. `session.json` and `events.jsonl` beside them are written by hand.

Development only (needs numpy, scikit-image, opencv-python-headless and ffmpeg):
    python3 -m venv .venv-demo && .venv-demo/bin/pip install numpy scikit-image opencv-python-headless
    .venv-demo/bin/python scripts/make_demo_session.py
The output is deterministic for a given set of package versions.
"""

import math
import subprocess
import sys
import wave
from pathlib import Path

import cv2
import numpy as np
from skimage import data

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "demo" / "session"
LIBRIVOX = Path("/usr/share/pocketsphinx/test/data/librivox")
CLIPS = ["0870", "0880", "0890", "0920", "0930"]
RATE = 16_000
FPS = 15
LEAD_S, GAP_S, TOTAL_S = 0.5, 0.5, 28.0
JPEG_QSCALE = "24"  # ffmpeg -q:v for MJPG; keeps the demo to a few MB

# Landmarks in the 512x512 portrait (measured by eye on a zoomed crop).
EYES = [(203, 100), (246, 103)]
EYE_AXES = (9, 5)
MOUTH_X = (196, 252)
LIP_Y = 146
CHIN_Y = 180
NECK = (223, 205)
# The part of the portrait shown, scaled to 640x480.
CROP = (60, 0, 460, 300)


def read_clip(name):
    path = LIBRIVOX / f"sense_and_sensibility_01_austen_64kb-{name}.wav"
    with wave.open(str(path)) as w:
        assert w.getframerate() == RATE and w.getnchannels() == 1 and w.getsampwidth() == 2, path
        return np.frombuffer(w.readframes(w.getnframes()), dtype="<i2").astype(np.float32) / 32768.0


def build_audio():
    total = int(TOTAL_S * RATE)
    audio = np.zeros(total, dtype=np.float32)
    pos = int(LEAD_S * RATE)
    spans = []
    for name in CLIPS:
        clip = read_clip(name)
        audio[pos:pos + len(clip)] = clip
        spans.append((name, pos / RATE, (pos + len(clip)) / RATE))
        pos += len(clip) + int(GAP_S * RATE)
    assert pos <= total, "clips do not fit"
    return audio, spans


def envelope(audio):
    """Per-frame speech envelope in [0, 1]: RMS over the frame, normalised, smoothed."""
    hop = RATE // FPS
    frames = len(audio) // hop
    rms = np.array([np.sqrt(np.mean(audio[i * hop:(i + 1) * hop] ** 2)) for i in range(frames)])
    env = np.clip(rms / (np.percentile(rms, 95) + 1e-9), 0, 1)
    smooth = np.convolve(env, [0.25, 0.5, 0.25], mode="same")
    return smooth


def blink_strength(t):
    """Nine blinks, each closing over 3 frames and opening over 3."""
    blinks = [1.7, 4.6, 7.9, 10.2, 13.8, 16.4, 19.9, 23.1, 26.2]
    for b in blinks:
        d = abs(t - b)
        if d < 0.2:
            return 1.0 - d / 0.2
    return 0.0


def animate(base, t, env, blink):
    img = base.copy()
    h, w = img.shape[:2]
    # Blink: pull the skin above each eye down over it.
    for (ex, ey) in EYES:
        if blink <= 0:
            break
        ax, ay = EYE_AXES
        lid_h = int(round(2 * ay * blink))
        for dy in range(-ay, -ay + lid_h):
            y = ey + dy
            src_y = ey - ay - 3 - (lid_h - (dy + ay))
            for dx in range(-ax, ax + 1):
                if (dx / ax) ** 2 + (dy / ay) ** 2 <= 1.0:
                    img[y, ex + dx] = base[src_y, ex + dx]
    # Jaw: everything below the lip line, within the mouth's width, moves down with the
    # envelope; the opened gap is the dark inside of the mouth.
    open_px = 5.0 * env
    if open_px > 0.3:
        ys, xs = np.mgrid[0:h, 0:w].astype(np.float32)
        x0, x1 = MOUTH_X
        wx = np.clip(1 - np.abs((xs - (x0 + x1) / 2) / ((x1 - x0) / 2 + 18)), 0, 1) ** 0.7
        wy = np.where(ys < LIP_Y, 0.0, np.where(ys < CHIN_Y, 1.0, np.clip(1 - (ys - CHIN_Y) / 25, 0, 1)))
        shift = (open_px * wx * wy).astype(np.float32)
        img = cv2.remap(img, xs, ys - shift, cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT)
        gap = (ys >= LIP_Y) & (ys < LIP_Y + shift) & (xs > x0 + 6) & (xs < x1 - 6)
        img[gap] = (img[gap] * 0.25 + np.array([30, 25, 60]) * 0.75).astype(np.uint8)
    # Head motion: a slow rotation about the neck and a drift.
    angle = 3.0 * math.sin(2 * math.pi * t / 7.0) + 1.5 * math.sin(2 * math.pi * t / 3.1)
    m = cv2.getRotationMatrix2D(NECK, angle, 1.0)
    m[0, 2] += 6.0 * math.sin(2 * math.pi * t / 9.0)
    m[1, 2] += 3.0 * math.sin(2 * math.pi * t / 5.0)
    img = cv2.warpAffine(img, m, (w, h), flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_REFLECT)
    x0, y0, x1, y1 = CROP
    return cv2.resize(img[y0:y1, x0:x1], (640, 480), interpolation=cv2.INTER_AREA)


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    audio, spans = build_audio()
    pcm = (np.clip(audio, -1, 1) * 32767).astype("<i2")
    with wave.open(str(OUT / "audio.wav"), "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(RATE)
        w.writeframes(pcm.tobytes())
    env = envelope(audio)
    base = data.astronaut()[:, :, ::-1].copy()  # RGB -> BGR
    # A webcam at arm's length keeps the background out of focus; the sharp flag and shuttle
    # would also cost most of the JPEG bits. Blur all but the head and shoulders.
    mask = np.zeros(base.shape[:2], np.float32)
    cv2.ellipse(mask, (223, 150), (110, 150), 0, 0, 360, 1.0, -1)
    mask = cv2.GaussianBlur(mask, (0, 0), 12)[..., None]
    blurred = cv2.GaussianBlur(base, (0, 0), 5)
    base = (base * mask + blurred * (1 - mask)).astype(np.uint8)
    frames = int(TOTAL_S * FPS)
    ffmpeg = subprocess.Popen(
        ["ffmpeg", "-v", "error", "-y", "-f", "rawvideo", "-pix_fmt", "bgr24", "-s", "640x480",
         "-r", str(FPS), "-i", "-", "-c:v", "mjpeg", "-q:v", JPEG_QSCALE, "-pix_fmt", "yuvj420p",
         "-bitexact", str(OUT / "video.avi")],
        stdin=subprocess.PIPE,
    )
    for i in range(frames):
        t = i / FPS
        frame = animate(base, t, float(env[min(i, len(env) - 1)]), blink_strength(t))
        ffmpeg.stdin.write(frame.tobytes())
    ffmpeg.stdin.close()
    if ffmpeg.wait() != 0:
        sys.exit("ffmpeg failed")
    for name, start, end in spans:
        print(f"clip {name}: {start:.3f} s .. {end:.3f} s")
    print(f"wrote {frames} frames and {len(audio) / RATE:.1f} s of audio to {OUT}")


if __name__ == "__main__":
    main()
