"""What a user does with the layers below: run, compare, report, recommend."""
