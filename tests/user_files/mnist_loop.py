# A small classifier trained by the loop people write (the pytorch/examples
# mnist layout, in our own words): train() and test() take the args, the model,
# the device, a loader, the optimizer and the epoch; main() builds them and
# steps the scheduler once per epoch.
import argparse
import torch
import torch.nn as nn
import torch.nn.functional as F
import torch.optim as optim
from torchvision import datasets, transforms
from torch.optim.lr_scheduler import StepLR


class SmallNet(nn.Module):
    def __init__(self):
        super(SmallNet, self).__init__()
        self.conv = nn.Conv2d(1, 4, 3, 1)
        self.hidden = nn.Linear(100, 16)
        self.out = nn.Linear(16, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv(x)), 2)
        x = torch.flatten(x, 1)
        x = F.relu(self.hidden(x))
        return F.log_softmax(self.out(x), dim=1)


def train(args, model, device, train_loader, optimizer, epoch):
    model.train()
    for batch_idx, (data, target) in enumerate(train_loader):
        data, target = data.to(device), target.to(device)
        optimizer.zero_grad()
        output = model(data)
        loss = F.nll_loss(output, target)
        loss.backward()
        optimizer.step()
        if batch_idx % args.log_interval == 0:
            print('epoch {} [{}/{}]\tloss {:.6f}'.format(
                epoch, batch_idx * len(data), len(train_loader.dataset), loss.item()))
            if args.dry_run:
                break


def test(model, device, test_loader):
    model.eval()
    test_loss = 0
    correct = 0
    with torch.no_grad():
        for data, target in test_loader:
            data, target = data.to(device), target.to(device)
            output = model(data)
            test_loss += F.nll_loss(output, target, reduction='sum').item()
            pred = output.argmax(dim=1, keepdim=True)
            correct += pred.eq(target.view_as(pred)).sum().item()

    test_loss /= len(test_loader.dataset)
    print('test: loss {:.4f}, {}/{} correct'.format(test_loss, correct, len(test_loader.dataset)))
    return test_loss, correct


def main():
    parser = argparse.ArgumentParser(description='small classifier')
    parser.add_argument('--batch-size', type=int, default=64, metavar='N')
    parser.add_argument('--epochs', type=int, default=3, metavar='N')
    parser.add_argument('--lr', type=float, default=1.0, metavar='LR')
    parser.add_argument('--gamma', type=float, default=0.7, metavar='M')
    parser.add_argument('--no-accel', action='store_true')
    parser.add_argument('--dry-run', action='store_true')
    parser.add_argument('--seed', type=int, default=1, metavar='S')
    parser.add_argument('--log-interval', type=int, default=10, metavar='N')
    args = parser.parse_args()
    use_accel = not args.no_accel and torch.cuda.is_available()
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if use_accel else "cpu")
    transform = transforms.Compose([transforms.ToTensor(), transforms.Normalize((0.1307,), (0.3081,))])
    train_set = datasets.FashionMNIST('../data', train=True, download=True, transform=transform)
    test_set = datasets.FashionMNIST('../data', train=False, transform=transform)
    train_loader = torch.utils.data.DataLoader(train_set, batch_size=args.batch_size)
    test_loader = torch.utils.data.DataLoader(test_set, batch_size=args.batch_size)

    model = SmallNet().to(device)
    optimizer = optim.Adadelta(model.parameters(), lr=args.lr)
    scheduler = StepLR(optimizer, step_size=1, gamma=args.gamma)
    for epoch in range(1, args.epochs + 1):
        train(args, model, device, train_loader, optimizer, epoch)
        test(model, device, test_loader)
        scheduler.step()


if __name__ == '__main__':
    main()
