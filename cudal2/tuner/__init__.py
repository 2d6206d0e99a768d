"""The tuner: a search's loop over proposals, its Optuna refiner, the confirmation of its leaders,
and the outcome it reports. The public function is cudal2.search (cudal2.api.search)."""
