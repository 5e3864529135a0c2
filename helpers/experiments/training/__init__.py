"""Training a CNN (notebook 09): does it learn, and how fast does it train?

:mod:`.learning`: a short training run to a test accuracy, and the dataset and device checks every
training experiment shares (``python -m helpers.experiments.training``). :mod:`.steps`: one
throughput point, training steps timed and split into waiting for data and computing.
:mod:`.throughput`: the sweeps over batch size, workers, depth and precision, and their command
(``python -m helpers.experiments.training.throughput``). :mod:`.utilisation`: GPU and CPU
utilisation sampled while a model trains. :mod:`.records`: the review's numbers and results/.
"""

from helpers.experiments.training.learning import (
    ACCURACY_THRESHOLD,
    TrainResult,
    check_device,
    check_whole,
    endless_loader,
    gpu_reason,
    load_dataset,
    main,
    train,
)

__all__ = ["ACCURACY_THRESHOLD", "TrainResult", "train", "gpu_reason", "load_dataset",
           "endless_loader", "check_device", "check_whole", "main"]
