from objstore_cli.main import main

main()
