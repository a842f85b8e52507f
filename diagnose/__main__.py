from diagnose.cli import main

if __name__ == "__main__":
    # `python -m diagnose` is the same program as the `diagnose` command (help, completion).
    main(prog_name="diagnose")
