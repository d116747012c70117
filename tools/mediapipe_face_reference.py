#!/usr/bin/env python3
"""Writes MediaPipe's own Python output on real face frames, for the facial stage's parity test.

Development tool (never needed by make demo/test/CI). Runs `mediapipe==0.10.14`'s legacy
solutions in static-image mode (detection on every image, no tracking) on frames of the
demo session (NASA portrait, public domain), also rotated and shrunk, and writes
tests/data/face/mediapipe_reference.json:
  {"video": ..., "cases": [{"frame": k, "rotate_deg": r, "scale": s,
     "detections": [{"box": [xmin, ymin, w, h], "keypoints": [[x, y] x 6], "score": p}],
     "mesh": [[x, y, z] x 468]}]}   (coordinates normalised to the transformed image)

    /tmp/mpvenv/bin/python tools/mediapipe_face_reference.py demo/session/video.avi
"""
import json
import sys

import cv2
import mediapipe as mp
import numpy as np


def transformed(frame, rotate_deg, scale):
    h, w = frame.shape[:2]
    m = cv2.getRotationMatrix2D((w / 2, h / 2), rotate_deg, scale)
    return cv2.warpAffine(frame, m, (w, h), flags=cv2.INTER_LINEAR, borderValue=(0, 0, 0))


def main():
    video = sys.argv[1]
    out = sys.argv[2] if len(sys.argv) > 2 else "tests/data/face/mediapipe_reference.json"
    cap = cv2.VideoCapture(video)
    frames = []
    k = 0
    while True:
        ok, f = cap.read()
        if not ok:
            break
        frames.append(f)
        k += 1
    cases = []
    det = mp.solutions.face_detection.FaceDetection(model_selection=0, min_detection_confidence=0.5)
    mesh = mp.solutions.face_mesh.FaceMesh(static_image_mode=True, max_num_faces=1,
                                           refine_landmarks=False, min_detection_confidence=0.5)
    for frame_index, rotate_deg, scale in [(0, 0, 1.0), (60, 0, 1.0), (140, 0, 1.0), (250, 0, 1.0),
                                            (330, 0, 1.0), (100, 25, 1.0), (200, -30, 0.8),
                                            (300, 10, 0.5), (400, 0, 0.35)]:
        img = transformed(frames[frame_index], rotate_deg, scale)
        rgb = cv2.cvtColor(img, cv2.COLOR_BGR2RGB)
        d = det.process(rgb)
        dets = []
        for x in d.detections or []:
            b = x.location_data.relative_bounding_box
            dets.append({"box": [b.xmin, b.ymin, b.width, b.height],
                         "keypoints": [[p.x, p.y] for p in x.location_data.relative_keypoints],
                         "score": x.score[0]})
        m = mesh.process(rgb)
        pts = ([[p.x, p.y, p.z] for p in m.multi_face_landmarks[0].landmark]
               if m.multi_face_landmarks else None)
        cases.append({"frame": frame_index, "rotate_deg": rotate_deg, "scale": scale,
                      "detections": dets, "mesh": pts})
        print(frame_index, rotate_deg, scale, len(dets), pts is not None)
    with open(out, "w") as f:
        json.dump({"source": "mediapipe 0.10.14 solutions.face_detection (short range) and "
                             "solutions.face_mesh (static_image_mode, refine_landmarks=False)",
                   "video": video, "transform": "cv2.getRotationMatrix2D(centre, rotate_deg, "
                   "scale), warpAffine INTER_LINEAR, black border", "cases": cases}, f)


if __name__ == "__main__":
    main()
