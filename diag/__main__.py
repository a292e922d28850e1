from diag.cli import main

main()
