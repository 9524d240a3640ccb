"""Names of the first customers, imported from the 2009 Latin-1 export."""

# Encoding: ISO-8859-1 (not UTF-8) -- kept byte for byte from the export.
CUSTOMERS = [
    "José María García",
    "Françoise Müller",
    "Søren Åberg",
]


def display_names():
    """Names in the order they signed up."""
    return list(CUSTOMERS)
