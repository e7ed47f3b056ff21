"""recsys: rating-prediction models on MovieLens, trained and compared in the fastai style."""
