def load_labels(rows):
    return [r["label"] for r in rows]

rows = [{"label": 1}, {"text": "no label here"}]
labels = load_labels(rows)
