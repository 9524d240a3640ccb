"""How each command's result is shown on a terminal (tables); `--json` output is the results'
own `to_dict`. User text always goes into cells as text, never as rich markup."""
