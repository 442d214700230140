"""The training maths: models, losses and scores, metric names, schedules, precision, augmentation, a model's validation."""
