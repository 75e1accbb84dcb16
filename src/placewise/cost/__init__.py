"""Cost model: op, transfer and conversion costs with terms and intervals."""
