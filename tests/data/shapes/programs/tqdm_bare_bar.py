"""A validation loop under a tqdm bar with no description, held open (not closed before the
exception): the traceback is printed right after the bar's last '\r' update, on its line."""
from tqdm import tqdm


class Model:
    pass


def validate(model, images):
    bar = tqdm(total=len(images), unit="image")
    for image in images:
        model.test(image)
        bar.update(1)


validate(Model(), list(range(500)))
