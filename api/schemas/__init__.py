"""Request and response bodies, split by resource; constraints are declared on the fields."""
