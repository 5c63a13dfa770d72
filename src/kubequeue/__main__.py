import sys

from kubequeue.cli import main

sys.exit(main())
