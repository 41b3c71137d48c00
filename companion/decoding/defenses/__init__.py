"""One module per decoding defense; :mod:`companion.decoding.registry` lists them."""
