#!/usr/bin/env python3
"""How the learned voice activity (`speech_activity`: Silero VAD's speech_prob per frame)
agrees with the energy rule (`audio_signal`'s voice_activity: the fraction of 10 ms rows
above the level floor and the noise floor), per stored session of a database.

A frame is speech by the energy rule when at least half its rows are voiced, and by the
model when speech_prob >= 0.5. Prints, per session: frames, the share each calls speech,
and the share of frames where they agree. Standard library only (development tool).

Usage: scripts/vad_agreement.py SESSION.db [SESSION_ID ...]
"""
import sqlite3
import struct
import sys


def column(conn, session, modality, index):
    rows = conn.execute(
        "SELECT frame_index, vec FROM frame_features WHERE session_id = ? AND modality = ? AND present = 1",
        (session, modality),
    )
    out = {}
    for frame, blob in rows:
        out[frame] = struct.unpack_from("<f", blob, 4 * index)[0]
    return out


def main():
    conn = sqlite3.connect(sys.argv[1])
    sessions = sys.argv[2:] or [r[0] for r in conn.execute("SELECT id FROM sessions ORDER BY id")]
    print(f"{'session':<12} {'frames':>6} {'energy':>7} {'model':>7} {'agree':>7}")
    for s in sessions:
        energy = column(conn, s, "audio_signal", 2)
        model = column(conn, s, "speech_activity", 0)
        frames = sorted(set(energy) & set(model))
        if not frames:
            print(f"{s:<12} no frames with both modalities")
            continue
        e = [energy[f] >= 0.5 for f in frames]
        m = [model[f] >= 0.5 for f in frames]
        n = len(frames)
        agree = sum(a == b for a, b in zip(e, m)) / n
        print(f"{s:<12} {n:>6} {sum(e) / n:>7.1%} {sum(m) / n:>7.1%} {agree:>7.1%}")


if __name__ == "__main__":
    main()
