"""`python -m atlas_ab.train eagle3 ...`: train an EAGLE-3 head (train/eagle3.py); anything else is
train/train.py's command line (a target + MTP, or a draft LM: `--out DIR --preset ...`)."""
import sys

if len(sys.argv) > 1 and sys.argv[1] == "eagle3":
    from atlas_ab.train.eagle3 import main
    main(sys.argv[2:])
else:
    from atlas_ab.train.train import main
    main()
