"""Search: proposers, the Optuna refiner, the result store, the search loop."""
