"""``python -m helpers.experiments.gpu_reference``: record the GPU references in one deadline."""

from helpers.experiments.gpu_reference.recording import main

if __name__ == "__main__":
    raise SystemExit(main())
