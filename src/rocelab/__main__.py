from rocelab.cli import main

main()
